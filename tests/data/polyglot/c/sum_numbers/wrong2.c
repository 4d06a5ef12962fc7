#include <stdio.h>

int main(void) {
    int n;
    scanf("%d", &n);
    long long total = 0, x;
    for (int i = 0; i < n; i++) { scanf("%lld", &x); total += x; }
    printf("sum=%lld\n", total);
    return 0;
}
