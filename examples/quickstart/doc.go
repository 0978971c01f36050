// Command quickstart runs a three-node graph that pauses for a human and
// resumes, printing what happens at each stage. The graph lives in package
// order.
//
//	go run ./examples/quickstart
package main
