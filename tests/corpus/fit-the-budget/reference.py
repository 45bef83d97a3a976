# expect: passed
# Micro-batching: enough chunks to fit the budget, each chunk's mean loss weighted by its
# share of the batch, one step at the end.
import math

chunks = math.ceil(2 / budget)  # k chunks keep about 1/k of the activations alive at once
optimizer.zero_grad()
for xc, yc in zip(x.tensor_split(chunks), y.tensor_split(chunks)):
    loss = loss_fn(model(xc), yc) * (len(xc) / len(x))
    loss.backward()
optimizer.step()
