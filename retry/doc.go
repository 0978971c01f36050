// Package retry is the one retry policy of lockstep: how many attempts a
// failed operation gets and how long to wait between them (exponential
// backoff, capped, with optional jitter). A graph node's retries
// (graph.WithRetry), a tool call's (nodes.Retry) and the approval worker's
// resumes (approval.WorkerOptions.Retry) all take a [Policy]. The package
// holds no state and imports nothing else of lockstep.
//
// # The schedule
//
// After the n-th failed attempt the wait before the next one is
//
//	base = min(Max, Initial × Multiplier^(n−1))
//	wait = min(Max, base × (1 + Jitter × (2u − 1)))
//
// where u is a uniform random number in [0, 1) read from Policy.Rand: the
// jitter spreads each wait evenly over [base × (1 − Jitter), base × (1 +
// Jitter)], never beyond Max. [Policy.Delay] computes it from a given u
// and is pure; [Policy.Wait] draws u first.
//
// # Zero values
//
// A zero field means what its doc says, and a value that means nothing is
// refused by [Policy.Validate] (a negative duration, a factor below 1, a
// jitter outside [0, 1]) with a [*PolicyError], never replaced:
//
//	field        zero means                            refused
//	MaxAttempts  DefaultMaxAttempts (3)                below 0
//	Initial      no wait: every retry starts at once   below 0, above Max
//	Multiplier   DefaultMultiplier (2)                 below 1 (but 0), NaN, ±Inf
//	Max          DefaultMax (10s)                      below 0, below Initial
//	Jitter       none: every wait is its base          below 0, above 1, NaN
//	Rand         crypto/rand                           -
//
// So the zero Policy makes three attempts with no wait between them. The
// packages that take a Policy check it when they are configured (Compile,
// NewTool, NewWorker) and refuse an invalid one there, wrapping the
// *PolicyError.
//
// # Randomness
//
// The jitter's randomness is injectable: Rand is any io.Reader (a seeded
// math/rand/v2.ChaCha8 reproduces a schedule in a test); nil reads
// crypto/rand. Nothing here uses a global random source.
//
// # Concurrency
//
// A Policy is a value: its methods may be called from several goroutines
// at once, provided its Rand is safe for concurrent use.
package retry
