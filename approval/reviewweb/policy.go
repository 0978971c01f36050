package reviewweb

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/lockstepgo/lockstep/approval"
)

// Policy says who may decide what. The application gives one; the handler
// asks it before every decision and before it offers the decision form.
type Policy interface {
	// Allow returns nil when rv may decide item, or an error saying why
	// not (wrap ErrForbidden; its message is shown to the reviewer, so it
	// must not carry secrets).
	Allow(ctx context.Context, rv Reviewer, item approval.Item) error
}

// PolicyFunc is a Policy written as a function.
type PolicyFunc func(ctx context.Context, rv Reviewer, item approval.Item) error

// Allow calls f.
func (f PolicyFunc) Allow(ctx context.Context, rv Reviewer, item approval.Item) error {
	return f(ctx, rv, item)
}

// AnyReviewer lets every authenticated reviewer decide every request, as
// the lockstep CLI lets anybody who may write the database. Use it only
// where the authenticator already limits who gets in (lockstep serve's
// local token).
func AnyReviewer() Policy {
	return PolicyFunc(func(context.Context, Reviewer, approval.Item) error { return nil })
}

// Grant lets some reviewers decide some requests. Empty fields match
// everything, except that a grant must name at least one reviewer or
// group.
type Grant struct {
	Reviewers []string      // reviewer names, exactly
	Groups    []string      // or any of these groups
	Tools     []string      // only calls of these tools
	MaxRisk   approval.Risk // only requests of this tier or lower
	Owners    []string      // only requests owned by these (approval.Request.Owner)
}

// Grants is a Policy: a reviewer may decide a request when some grant
// matches both.
type Grants []Grant

// Allow implements Policy. It returns an error matching ErrForbidden
// that names the tool and tier when no grant matches.
func (gs Grants) Allow(_ context.Context, rv Reviewer, item approval.Item) error {
	r := item.Request
	for _, g := range gs {
		who := slices.Contains(g.Reviewers, rv.Name) || slices.ContainsFunc(g.Groups, func(x string) bool { return slices.Contains(rv.Groups, x) })
		switch {
		case !who:
		case len(g.Tools) > 0 && !slices.Contains(g.Tools, r.Tool):
		case g.MaxRisk != "" && !riskAtMost(r.Risk, g.MaxRisk):
		case len(g.Owners) > 0 && !slices.Contains(g.Owners, r.Owner):
		default:
			return nil
		}
	}
	return fmt.Errorf("%w: no grant lets %s decide %s calls of risk %s", ErrForbidden, quote(rv.Name), quote(r.Tool), quote(string(r.Risk)))
}

// riskAtMost reports whether r is max or a lower tier; an unknown tier is
// above every other.
func riskAtMost(r, max approval.Risk) bool {
	return r.Valid() && (r == max || !r.AtLeast(max))
}

// RequesterFunc returns the identity on whose behalf a gated call was
// made (the user who asked the agent), "" when it is not known. The
// handler refuses that identity's approval or edit of the call (a
// rejection, which withdraws it, is allowed).
type RequesterFunc func(ctx context.Context, item approval.Item) (string, error)

// RequestedBy is the default RequesterFunc: the string field
// "requested_by" of the request's reviewer context (approval.Request's
// Context, which the tool node fills from nodes.WithReviewContext).
func RequestedBy(_ context.Context, item approval.Item) (string, error) {
	var c struct {
		RequestedBy string `json:"requested_by"`
	}
	if len(item.Request.Context) == 0 || json.Unmarshal(item.Request.Context, &c) != nil {
		return "", nil
	}
	return c.RequestedBy, nil
}

// sameIdentity reports whether two identities name the same person,
// ignoring case and surrounding space.
func sameIdentity(a, b string) bool {
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	return a != "" && strings.EqualFold(a, b)
}

// quote quotes a name for a message, cut to a readable length.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		return fmt.Sprintf("%q...", display(s, max, false).String())
	}
	return fmt.Sprintf("%q", s)
}
