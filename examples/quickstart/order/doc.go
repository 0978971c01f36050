// Package order holds the graph of the quickstart example, so that the
// example's main and the lockstep CLI (lockstep graph quickstart) share
// it: price → approve (pauses for a human) → charge.
package order
