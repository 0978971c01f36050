package nodes

// Redactor is the executor's redactor, for the redactor's own tests and
// benchmarks.
type Redactor = redactor

// NewTestRedactor returns a redactor that knows values (values shorter
// than the minimum are ignored, as the executor refuses them).
func NewTestRedactor(values ...string) *Redactor {
	r := newRedactor()
	for _, v := range values {
		r.add(v)
	}
	return r
}
