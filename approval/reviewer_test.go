package approval_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/approval"
)

// TestCheckReviewer: the identity check that authenticators run at
// sign-in is the one decisions run.
func TestCheckReviewer(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"alice@example.com", true},
		{"Priya Raman (compliance)", true},
		{"", false},
		{"   ", false},
		{"ali\u202Ece", false},   // right-to-left override
		{"bob\u200b", false},     // zero-width space
		{"eve\x07", false},       // control
		{"system:expiry", false}, // reserved
		{"ＳＹＳＴＥＭ:me", false},     // reserved, full width
		{"bad\xffutf8", false},
		{strings.Repeat("a", approval.MaxReviewerBytes+1), false},
	} {
		err := approval.CheckReviewer(tc.name)
		if (err == nil) != tc.ok {
			t.Errorf("CheckReviewer(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, approval.ErrInvalidDecision) {
			t.Errorf("CheckReviewer(%q) = %v, want an error matching ErrInvalidDecision", tc.name, err)
		}
	}
}
