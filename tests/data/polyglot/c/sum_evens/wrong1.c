long long sum_evens(const long long* xs, int xs_len) {
    long long total = 0;
    for (int i = 0; i < xs_len; i++)
        if (xs[i] % 2 != 0) total += xs[i];
    return total;
}
