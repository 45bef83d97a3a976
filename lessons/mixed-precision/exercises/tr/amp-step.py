# Zaten tanımlı: model, loss_fn, optimizer, loader, scaler, device_type, amp_dtype,
# max_norm, torch, nn
# Bu saf float32 döngüsünü karma hassasiyetli bir döngüye çevir: ileri geçişi amp_dtype ile
# autocast içinde çalıştır; loss'u `scaler` ölçeklesin, inf/NaN gradyanlı adımları atlasın ve
# ölçeği ayarlasın; her adımdan önce de gradyanları (ölçekleri geri alınmış olarak!) max_norm'a
# göre kırp.

for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
