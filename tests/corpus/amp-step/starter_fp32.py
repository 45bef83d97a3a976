# expect: failed autocast_not_used
# The unchanged starter code: plain float32, no autocast, no scaler.
for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
