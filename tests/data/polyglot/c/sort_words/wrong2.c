#include <stdio.h>

int main(void) {
    int n;
    char word[256];
    if (scanf("%d", &n) != 1) return 1;
    for (int i = 0; i < n; i++) {
        if (scanf("%255s", word) != 1) return 1;
        puts(word);  /* not sorted */
    }
    return 0;
}
