// Package schema is the ent schema of entretry's tests: the chaos
// harness's two tables.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// K is a hot row: its id is given, its n bumped.
type K struct{ ent.Schema }

func (K) Annotations() []schema.Annotation { return []schema.Annotation{entsql.Annotation{Table: "k"}} }

func (K) Fields() []ent.Field {
	return []ent.Field{field.Int("id"), field.Int("n")}
}

// Ledger is one applied call: its id is the call's unique value, stored in
// column v (not unique in the table, so a duplicate shows).
type Ledger struct{ ent.Schema }

func (Ledger) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "ledger"}}
}

func (Ledger) Fields() []ent.Field {
	return []ent.Field{field.Int64("id").StorageKey("v"), field.String("grp")}
}
