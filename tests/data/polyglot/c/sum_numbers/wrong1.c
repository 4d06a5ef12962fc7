#include <stdio.h>

int main(void) {
    int n;
    if (scanf("%d", &n) != 1) return 1;
    int total = 0, x;  /* 32 bits */
    for (int i = 0; i < n; i++) {
        if (scanf("%d", &x) != 1) return 1;
        total += x;
    }
    printf("%d\n", total);
    return 0;
}
