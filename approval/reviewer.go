package approval

// CheckReviewer checks that name can identify a human reviewer by the
// rules every decision applies (see the package documentation, "Deciding",
// rule 2): non-empty, valid UTF-8 without control, format or invisible
// characters, at most MaxReviewerBytes, and not starting with
// SystemPrefix in any case or width. Code that authenticates reviewers
// calls it to refuse an unusable identity at sign-in rather than at the
// first decision. It returns an *Error matching ErrInvalidDecision, or
// nil.
func CheckReviewer(name string) error {
	if why := checkReviewer(name); why != "" {
		return newError("", ErrInvalidDecision, "%s", why)
	}
	return nil
}
