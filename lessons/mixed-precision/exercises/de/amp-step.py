# Bereits definiert: model, loss_fn, optimizer, loader, scaler, device_type, amp_dtype,
# max_norm, torch, nn
# Mach aus dieser reinen float32-Schleife eine mit gemischter Präzision: Führe den Forward-Pass
# unter autocast mit amp_dtype aus, lass `scaler` den Loss skalieren, Steps mit inf/NaN-Gradienten
# überspringen und die Skala anpassen, und clippe die (zurückskalierten!) Gradienten vor jedem
# Step auf max_norm.

for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
