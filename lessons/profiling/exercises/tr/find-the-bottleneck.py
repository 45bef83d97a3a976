# Zaten tanımlı: model, loss_fn, optimizer, features ve targets (veri setinin tamamı,
# `device` üzerindeki tensörler olarak), batch_size, device, torch ve nn.
#
# Aşağıdaki train_step(step) yavaş. Profilini çıkar, zamanın çoğunun harcandığı
# record_function etiketini BOTTLENECK değişkenine ata, sonra o parçayı, adım çok daha
# hızlı çalışacak ve yine tam olarak aynı şeyi hesaplayacak şekilde düzelt.
from torch.profiler import ProfilerActivity, profile, record_function

BOTTLENECK = None  # en yavaş parçanın etiketi, örneğin "forward"

history = []


def load_batch(step):
    """`step` numaralı batch: sıradaki batch_size örnek (veri setinin sonuna gelince
    başa dönülür); her biri, veri setinin özellik başına ortalaması ve standart sapmasıyla
    normalize edilir."""
    with record_function("load_batch"):
        rows, labels = [], []
        for i in range(batch_size):
            index = (step * batch_size + i) % len(features)
            mean = features.mean(dim=0)
            std = features.std(dim=0)
            rows.append((features[index] - mean) / std)
            labels.append(targets[index])
        return torch.stack(rows), torch.stack(labels)


def log_metrics(loss, logits, y):
    with record_function("log_metrics"):
        correct = (logits.argmax(dim=1) == y).sum()
        history.append((loss.detach(), correct))


def train_step(step):
    x, y = load_batch(step)
    with record_function("forward"):
        logits = model(x)
        loss = loss_fn(logits, y)
    with record_function("backward"):
        optimizer.zero_grad()
        loss.backward()
    with record_function("optimizer_step"):
        optimizer.step()
    log_metrics(loss, logits, y)
    return loss


# Üç adımın profilini çıkarıp zamanın nereye gittiğini yazdırmak için aşağıdaki
# satırları yorumdan çıkar. Değerlendirici bu kodu her gizli senaryo için bir kez
# çalıştırır ve sana ilk çalıştırmanın yazdırdıklarını gösterir.
#
# activities = [ProfilerActivity.CPU]
# if device.type == "cuda":
#     activities.append(ProfilerActivity.CUDA)
# with profile(activities=activities) as prof:
#     for step in range(3):
#         train_step(step)
# print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
