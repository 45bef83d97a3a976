# Bereits definiert: model, loss_fn, optimizer, features und targets (der ganze
# Datensatz, als Tensoren auf `device`), batch_size, device, torch und nn.
#
# Der Schritt train_step(step) weiter unten ist langsam. Untersuche ihn mit dem Profiler,
# setze BOTTLENECK auf das record_function-Label, in dem die meiste Zeit vergeht, und
# behebe dann diesen Teil so, dass der Schritt viel schneller läuft und trotzdem genau
# dasselbe berechnet.
from torch.profiler import ProfilerActivity, profile, record_function

BOTTLENECK = None  # das Label des langsamsten Teils, z. B. "forward"

history = []


def load_batch(step):
    """Batch Nr. `step`: die nächsten batch_size Beispiele (nach dem Ende des
    Datensatzes geht es vorne weiter), jedes mit Mittelwert und Standardabweichung des
    Datensatzes pro Feature normalisiert."""
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


# Kommentiere die Zeilen unten ein, um drei Schritte zu profilieren und auszugeben, wo
# die Zeit vergeht. Der Grader führt dieses Skript einmal pro verstecktem Szenario aus und
# zeigt dir, was der erste Lauf ausgegeben hat.
#
# activities = [ProfilerActivity.CPU]
# if device.type == "cuda":
#     activities.append(ProfilerActivity.CUDA)
# with profile(activities=activities) as prof:
#     for step in range(3):
#         train_step(step)
# print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
