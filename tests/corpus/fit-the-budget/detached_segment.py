# expect: failed gradients_cut
# Runs the first half of the model without building a graph (to save its activations): the
# graph is cut there, so the first layers never get a gradient.
layers = list(model)
optimizer.zero_grad()
with torch.no_grad():
    h = x
    for layer in layers[:16]:
        h = layer(h)
for layer in layers[16:]:
    h = layer(h)
loss_fn(h, y).backward()
optimizer.step()
