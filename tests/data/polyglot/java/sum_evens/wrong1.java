import java.util.*;

class Solution {
    public static long sum_evens(List<Long> xs) {
        long total = 0;
        for (long x : xs) if (x % 2 != 0) total += x;
        return total;
    }
}
