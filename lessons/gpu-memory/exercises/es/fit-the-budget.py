# Ya tienes definidos: model, loss_fn, optimizer, x, y, budget, torch, nn
# Este es un paso de entrenamiento normal sobre el lote completo. Haz que su pico de memoria
# sea como mucho `budget` veces el pico de este paso, sin dejar de dar exactamente un paso
# del optimizador con la misma actualización.

optimizer.zero_grad()
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
