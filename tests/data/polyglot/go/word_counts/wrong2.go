package main

import "strings"

func word_counts(text string) map[string]int {
	counts := map[string]int{}
	for _, w := range strings.Split(text, " ") {
		counts[w]++
	}
	return counts
}
