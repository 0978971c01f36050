// Package scripted is a chat model for offline runs and tests: it answers
// from a script of turns instead of calling a provider. It implements
// nodes.Model and is kept apart from the real adapters (see
// nodes.FromLangchaingo) so that nothing in production depends on it.
//
// # Turns
//
// A Model's answer to a call is the script's turn k, where k is the number
// of assistant messages in the conversation it is sent. A run that is
// resumed, or restarted in a new process with a new Model, therefore
// answers exactly as the first run would have, and several threads can
// share one Model. A turn answers with text, tool calls or both; it may
// check what it was sent first (Expect) or fail like a provider (Err).
//
// # Errors
//
// A Model fails loudly, never with an empty answer: a call past the end of
// the script returns a *TurnError matching ErrExhausted, and a failed
// expectation one matching ErrUnexpected, each naming the turn. The model
// node wraps them in a *nodes.ModelError, so a run fails with the turn in
// its message.
//
// # Concurrency
//
// A Model is safe for concurrent use. It records every call (Calls) for
// assertions.
package scripted
