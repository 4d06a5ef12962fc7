#include <stdio.h>

int main(void) {
    int n;
    if (scanf("%d", &n) != 1) return 1;
    long long total = 0, x;
    for (int i = 0; i < n; i++) {
        if (scanf("%lld", &x) != 1) return 1;
        total += x;
    }
    printf("%lld\n", total);
    return 0;
}
