module github.com/hookd/hookd/examples/go

go 1.26.0

require github.com/hookd/hookd/sdk/go v0.0.0

require (
	github.com/apapsch/go-jsonmerge/v2 v2.0.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/oapi-codegen/runtime v1.9.0 // indirect
	github.com/standard-webhooks/standard-webhooks/libraries v0.0.1 // indirect
)

replace github.com/hookd/hookd/sdk/go => ../../sdk/go
