# expect: error timeout
while True:
    pass
