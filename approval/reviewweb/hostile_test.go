package reviewweb_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lockstepgo/lockstep/approval/reviewweb"
	"github.com/lockstepgo/lockstep/checkpoint"
)

// hostileCall is a gated call whose every model-made string attacks the
// page: markup, script URLs, a 5 MB argument, direction overrides.
func hostileCall() call {
	big := strings.Repeat("A", 5<<20)
	args, _ := json.Marshal(map[string]any{
		"a_hotel":  "<script>alert('args')</script>",
		"a_link":   "javascript:alert(document.cookie)",
		"blob":     big,
		"a_nights": 2,
	})
	return call{
		Tool:      "book\u202Elatoh_", // reads "book_hotel" backwards when obeyed
		Args:      args,
		Rationale: `<script>alert(1)</script><img src=x onerror=alert(2)> see <a href="javascript:alert(3)">here</a>`,
		Context:   json.RawMessage(`{"guest":"\u202Eevil","html":"<b onmouseover=alert(4)>x</b>"}`),
		Risk:      "high",
		Owner:     "desk\u2066\u200b",
	}
}

// TestHostilePayload: a hostile call renders inert and truthful: markup
// is text, script URLs are never links, the direction override is shown
// as a mark and not obeyed, the 5 MB argument is cut (and the cut said),
// while the API returns the arguments whole.
func TestHostilePayload(t *testing.T) {
	if raceEnabled {
		t.Skip("a 5 MB argument through every page: minutes under the race detector, which it does not need (it races nothing); it runs without it")
	}
	f := newFixture(t)
	id := f.start(t, "hostile", hostileCall())
	s := newServer(t, f, nil)
	c := s.client(t, "bob@example.com")
	for _, p := range []string{"/", "/approvals/" + id, "/approvals/" + id + "?fragment=row", "/approvals/" + id + "?fragment=decision"} {
		resp, body := c.do("GET", p, "", nil)
		wantStatus(t, p, resp, body, 200, "")
		for _, bad := range []string{"<script>alert", "<img src=x", `href="javascript:`, "<b onmouseover", "\u202E", "\u2066", "\u200b"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s contains %q", p, bad)
			}
		}
		if len(body) > 600<<10 {
			t.Errorf("%s is %d bytes: the 5 MB argument was not cut", p, len(body))
		}
	}
	_, page := c.do("GET", "/approvals/"+id, "", nil)
	for _, want := range []string{
		"&lt;script&gt;alert(1)&lt;/script&gt;",                                 // the rationale, as text
		`title="RIGHT-TO-LEFT OVERRIDE (shown, not applied)">U&#43;202E</span>`, // the tool name's override, visible
		`>U&#43;2066</span>`, `>U&#43;200B</span>`, // the owner's isolate and zero-width space
		"javascript:alert(document.cookie)", // the argument, as text
		"more bytes not shown",              // the cut, said
		"too large to show in full",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the approval page lacks %q", want)
		}
	}
	// The JSON API returns the arguments whole and escaped.
	resp, body := c.do("GET", "/api/v1/approvals/"+id, "", nil)
	wantStatus(t, "api", resp, body, 200, "")
	if len(body) < 5<<20 || strings.Contains(body, "<script>") {
		t.Errorf("the API answer is %d bytes, or holds raw markup", len(body))
	}
	var got struct{ Request struct{ Tool string } }
	json.Unmarshal([]byte(body), &got)
	if got.Request.Tool != hostileCall().Tool {
		t.Errorf("the API changed the tool name to %q", got.Request.Tool)
	}
}

// badBytes wraps a saver so that stored interrupt values and thread names
// carry bytes that are not UTF-8 (as a database written by something else
// might).
type badBytes struct{ *checkpoint.MemorySaver }

func (b badBytes) PendingInterrupts(ctx context.Context, q checkpoint.InterruptQuery) ([]checkpoint.PendingInterrupt, string, error) {
	pis, next, err := b.MemorySaver.PendingInterrupts(ctx, q)
	for i := range pis {
		pis[i].Value = bytes.ReplaceAll(pis[i].Value, []byte("BADBYTES"), []byte("\xff\xfe"))
		pis[i].Thread = strings.ReplaceAll(pis[i].Thread, "BADBYTES", "\xff\xfe")
	}
	return pis, next, err
}

// TestInvalidUTF8: bytes that are not UTF-8 are shown as marks saying so,
// never passed through (here in a thread name). A request whose JSON holds
// such bytes is not decoded at all (approval.ParseRequest refuses it, as
// it refuses anything json.Marshal does not write): none of its text is
// shown, and it cannot be approved.
func TestInvalidUTF8(t *testing.T) {
	f := newFixture(t)
	cl := defaultCall()
	cl.Rationale = "price BADBYTES here"
	id := f.start(t, "t-BADBYTES", cl)
	s := newServer(t, f, func(o *reviewweb.Options) { o.Saver = badBytes{f.saver} })
	c := s.client(t, "bob@example.com")
	_, body := c.do("GET", "/approvals/"+id, "", nil)
	if strings.Contains(body, "\xff") || !strings.Contains(body, `title="a byte that is not UTF-8"`) {
		t.Errorf("the page does not show the invalid bytes as marks:\n%.3000s", body)
	}
	if strings.Contains(body, "price ") || !strings.Contains(body, "can no longer be approved") {
		t.Errorf("the page shows a request that does not decode as one that can be approved:\n%.3000s", body)
	}
	if resp, body := c.decide(id, `{"outcome":"approved"}`); resp.StatusCode/100 == 2 {
		t.Errorf("the request that does not decode was approved: %d %s", resp.StatusCode, body)
	}
}
