package otelretry_test

import (
	"context"
	"fmt"
	"log"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/otelretry"
)

// A Policy observed into a meter provider; one deadlock retried.
func ExampleObserver() {
	reader := sdkmetric.NewManualReader()
	o, err := otelretry.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		log.Fatal(err)
	}
	p, err := sqlretry.New(sqlretry.Config{Classifier: sqlretry.ClassifierFunc(classify), BaseDelay: 1, MaxDelay: 1, Observer: o})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := o.RegisterPolicy(p, attribute.String("db.namespace", "orders")); err != nil {
		log.Fatal(err)
	}
	_ = p.Do(context.Background(), sqlretry.Idempotent("load-order"), failing(errDeadlock))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			for _, dp := range sum.DataPoints {
				code, _ := dp.Attributes.Value("code")
				fmt.Println(m.Name, code.AsString(), dp.Value)
			}
		}
	}
	// Output: sqlretry.retries 40P01 1
}
