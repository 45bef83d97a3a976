# expect: failed over_budget
optimizer.zero_grad()
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
