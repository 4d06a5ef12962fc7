package main

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"
)

func main() {
	in := bufio.NewReader(os.Stdin)
	var n int
	fmt.Fscan(in, &n)
	words := make([]string, n)
	for i := range words {
		fmt.Fscan(in, &words[i])
	}
	sort.Slice(words, func(a, b int) bool { return strings.ToLower(words[a]) < strings.ToLower(words[b]) })
	for _, w := range words {
		fmt.Println(w)
	}
}
