# Bereits definiert: model, loss_fn, optimizer, x, y, budget, torch, nn
# Das ist ein ganz normaler Trainingsschritt auf dem ganzen Batch. Sorge dafür, dass sein
# Spitzenspeicher höchstens `budget`-mal so hoch ist wie jetzt, während er weiterhin genau
# einen Optimizer-Step mit demselben Update macht.

optimizer.zero_grad()
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
