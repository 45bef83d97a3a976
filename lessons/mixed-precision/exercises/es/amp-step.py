# Ya tienes definidos: model, loss_fn, optimizer, loader, scaler, device_type, amp_dtype,
# max_norm, torch, nn
# Convierte este bucle en float32 puro en uno de precisión mixta: haz el forward dentro de
# autocast con amp_dtype, deja que `scaler` escale la pérdida, se salte los pasos con gradientes
# inf/NaN y ajuste la escala, y recorta los gradientes (¡ya desescalados!) a max_norm antes de
# cada paso.

for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
