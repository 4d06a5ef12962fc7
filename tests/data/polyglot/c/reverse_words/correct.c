#include <stdlib.h>
#include <string.h>

char* reverse_words(const char* s) {
    size_t n = strlen(s);
    char* out = malloc(n + 1);
    size_t len = 0;
    size_t end = n;
    while (end > 0) {
        while (end > 0 && s[end - 1] == ' ') end--;
        size_t start = end;
        while (start > 0 && s[start - 1] != ' ') start--;
        if (end > start) {
            if (len) out[len++] = ' ';
            memcpy(out + len, s + start, end - start);
            len += end - start;
        }
        end = start;
    }
    out[len] = 0;
    return out;
}

int main(void) { return 0; }
