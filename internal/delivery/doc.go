// Package delivery owns the delivery hot path: the outcome classifier (the one
// place HTTP status codes and transport errors are interpreted), Standard
// Webhooks signing and verification, the retry schedule with full jitter and
// Retry-After handling, the River deliver worker and the batched attempt
// ledger.
//
// The classifier, signing and retry code are pure: time and randomness are
// passed in by the caller, never read from the process.
package delivery
