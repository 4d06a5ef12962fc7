import sys

data = sys.stdin.read().split()
print("sum =", sum(int(x) for x in data[1:]))
