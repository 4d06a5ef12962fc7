n = int(input())
words = [input().strip() for _ in range(n)]
print("\n".join(sorted(words, key=str.lower)))
