def reverse_words(s):
    return s[::-1]
