// Package approval gates the one-way doors of an agent behind durable human
// decisions.
//
// A gated tool call pauses its run with a [Request] as the interrupt value,
// so the request is saved in the same transaction as the pause and its ID is
// the interrupt's ID. A reviewer's [Decision] is the answer the run resumes
// with. [Rules] decide deterministically which calls need a human.
package approval
