#include <vector>

long long sum_evens(std::vector<long long> xs) {
    long long total = 0;
    for (long long x : xs)
        if (x % 2) total += x;
    return total;
}
