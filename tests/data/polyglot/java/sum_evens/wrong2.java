import java.util.*;

class Solution {
    public static long sum_evens(List<Long> xs) {
        int total = 0;  // 32 bits: overflows
        for (long x : xs) if (x % 2 == 0) total += (int) x;
        return total;
    }
}
