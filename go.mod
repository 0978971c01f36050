module github.com/lockstepgo/lockstep

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/mattn/go-sqlite3 v1.14.53 // indirect
	github.com/tmc/langchaingo v0.1.14 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
)
