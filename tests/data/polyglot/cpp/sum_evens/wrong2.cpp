#include <vector>

int sum_evens(const std::vector<long long>& xs) {
    int total = 0;  // 32 bits: overflows
    for (long long x : xs)
        if (x % 2 == 0) total += static_cast<int>(x);
    return total;
}
