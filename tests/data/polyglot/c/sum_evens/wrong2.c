long long sum_evens(const long long* xs, int xs_len) {
    int total = 0;  /* 32 bits: overflows */
    for (int i = 0; i < xs_len; i++)
        if (xs[i] % 2 == 0) total += (int)xs[i];
    return total;
}
