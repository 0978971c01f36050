// Package demotest holds what the examples' tests share: running an
// example stopped at every point where a Ctrl-C can land, and checking the
// file the next run leaves; running an example's command twice on one
// file, and its usage errors. It is for tests only; the examples do not
// import it. Its helpers report through the *testing.T they are given and
// keep no state between calls.
package demotest
