package order_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind (R49).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
