module github.com/queuey/queuey

go 1.26

require (
	github.com/benbjohnson/clock v1.3.5
	github.com/google/go-cmp v0.7.0
	github.com/rabbitmq/amqp091-go v1.16.0
	pgregory.net/rapid v1.3.0
)
