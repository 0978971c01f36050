// Package order holds the graph of the quickstart example, so that the
// example's main and its tests share it: price → approve (pauses for a
// human) → charge.
package order
