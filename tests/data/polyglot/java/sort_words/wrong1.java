import java.io.*;
import java.util.*;

public class Words {
    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        int n = Integer.parseInt(in.readLine().trim());
        List<String> words = new ArrayList<>();
        for (int i = 0; i < n; i++) words.add(in.readLine().trim());
        words.sort(String.CASE_INSENSITIVE_ORDER);
        for (String w : words) System.out.println(w);
    }
}
