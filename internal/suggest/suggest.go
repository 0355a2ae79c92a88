// Package suggest names the known name a mistyped one was probably meant to
// be: the nearest flag to an unknown flag, the nearest key to an unknown
// configuration or request key. It is a leaf: pure functions of strings.
package suggest

// Nearest returns the name in known that name was most likely meant to be,
// or "" when none is near enough: one that name begins (as "--snapshot"
// begins "--snapshot-interval"), or one within a third of name's length in
// edits, at most 3 (Distance). Among equally near names the first in known
// wins.
func Nearest(name string, known []string) string {
	best, bestD := "", min(3, len(name)/3)+1
	for _, k := range known {
		if k == name {
			continue
		}
		d := Distance(name, k)
		if len(name) > 0 && len(k) > len(name) && k[:len(name)] == name {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// Distance is the Levenshtein distance between a and b: the fewest
// one-byte insertions, deletions and substitutions that turn a into b.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
