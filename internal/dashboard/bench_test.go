package dashboard

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/queuey/queuey/queuey"
)

// The overview of 50 work queues holding 10,000 dead letters between them,
// served on membroker through the Inspector and the management API client:
// issue 29 bounds it at 200 ms. It reads counts only, so the dead letters
// cost nothing but their counting; a queue's page reads its dead letters
// (up to GroupLimit).
func BenchmarkOverview(b *testing.B) {
	queues := make([]string, 50)
	for i := range queues {
		queues[i] = fmt.Sprintf("jobs-%02d", i)
	}
	f := newFixture(b, Options{}, queues...)
	for i := range 10000 - 6 {
		f.deadLetter(b, queues[i%len(queues)], fmt.Sprintf("d-%d", i), "email", queuey.ReasonAttemptsExhausted)
	}
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		f.dash.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/", nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("overview: %d\n%s", rec.Code, rec.Body)
		}
	}
}

// A queue's page with 200 dead letters to group.
func BenchmarkQueuePage(b *testing.B) {
	f := newFixture(b, Options{})
	for i := range 200 - 6 {
		f.deadLetter(b, "jobs", fmt.Sprintf("d-%d", i), "email", queuey.ReasonAttemptsExhausted)
	}
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		f.dash.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/queues/jobs", nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("queue page: %d\n%s", rec.Code, rec.Body)
		}
	}
}
