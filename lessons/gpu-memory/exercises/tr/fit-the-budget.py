# Zaten tanımlı: model, loss_fn, optimizer, x, y, budget, torch, nn
# Bu, tüm batch üzerinde sıradan bir eğitim adımı. Bellek zirvesini bu adımın zirvesinin en
# fazla `budget` katına indir; adım yine tam olarak bir optimizer adımı atsın ve aynı
# güncellemeyi yapsın.

optimizer.zero_grad()
loss = loss_fn(model(x), y)
loss.backward()
optimizer.step()
