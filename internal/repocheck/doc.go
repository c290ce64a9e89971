// Package repocheck holds tests of the repository itself, not of any
// package: every citation of docs/rabbitmq-semantics.md resolves to a
// section of it, no committed file names a path outside the
// repository, no non-test Go file is over 700 lines, and every import
// points down docs/architecture.md's map. It has no code.
package repocheck
