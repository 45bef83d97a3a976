# Ya tienes definidos: model, loss_fn, optimizer, features y targets (el conjunto de
# datos completo, como tensores en `device`), batch_size, device, torch y nn.
#
# El train_step(step) de más abajo es lento. Mídelo con el profiler, asigna a BOTTLENECK
# la etiqueta de record_function en la que se va la mayor parte del tiempo y luego arregla
# esa parte para que el paso sea mucho más rápido y siga calculando exactamente lo mismo.
from torch.profiler import ProfilerActivity, profile, record_function

BOTTLENECK = None  # la etiqueta de la parte más lenta, p. ej. "forward"

history = []


def load_batch(step):
    """Lote número `step`: los siguientes batch_size ejemplos (al llegar al final del
    conjunto de datos se vuelve al principio), cada uno normalizado con la media y la
    desviación estándar de cada característica en el conjunto de datos."""
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


# Descomenta estas líneas para perfilar tres pasos e imprimir en qué se va el tiempo. El
# corrector ejecuta este script una vez por cada escenario oculto y te muestra lo que
# imprimió la primera ejecución.
#
# activities = [ProfilerActivity.CPU]
# if device.type == "cuda":
#     activities.append(ProfilerActivity.CUDA)
# with profile(activities=activities) as prof:
#     for step in range(3):
#         train_step(step)
# print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
