n = int(input())
words = [input().strip() for _ in range(n)]
print(" ".join(sorted(words)))
