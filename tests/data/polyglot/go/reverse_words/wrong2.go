package main

import "strings"

func reverse_words(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
