#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
    return strcmp(*(char* const*)a, *(char* const*)b);
}

int main(void) {
    int n;
    if (scanf("%d", &n) != 1) return 1;
    char** words = malloc(sizeof(char*) * (n > 0 ? n : 1));
    for (int i = 0; i < n; i++) {
        words[i] = malloc(256);
        if (scanf("%255s", words[i]) != 1) return 1;
    }
    qsort(words, n, sizeof(char*), cmp);
    for (int i = 0; i < n; i++) puts(words[i]);
    return 0;
}
