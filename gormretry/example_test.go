package gormretry_test

import (
	"context"
	"errors"
	"log"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/gormretry"
	sqlpg "github.com/sqlretry/sqlretry/postgres"
)

type Order struct {
	ID    string
	Total int
}

type Account struct {
	ID      int
	Balance int
}

// A transaction that moves money and records an order: retried whole on a
// deadlock or a lost connection, its COMMIT settled by looking the order up.
func ExampleTransaction() {
	ctx := context.Background()
	p, err := sqlretry.New(sqlretry.Config{Classifier: sqlpg.Classifier, Fencer: sqlpg.Fencer})
	if err != nil {
		log.Fatal(err)
	}
	sdb, err := sqlretry.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", p)
	if err != nil {
		log.Fatal(err)
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sdb}), &gorm.Config{SkipDefaultTransaction: true})
	if err != nil {
		log.Fatal(err)
	}
	order := Order{ID: sqlretry.NewKey(), Total: 40}
	verify := sqlretry.Exists(sdb, "SELECT 1 FROM orders WHERE id = $1", order.ID)
	err = gormretry.Transaction(ctx, db, p, sqlretry.Write("place-order", verify), func(tx *gorm.DB) error {
		if err := tx.Model(&Account{ID: 1}).UpdateColumn("balance", gorm.Expr("balance - ?", order.Total)).Error; err != nil {
			return err
		}
		return tx.Create(&order).Error
	})
	if errors.Is(err, sqlretry.ErrAmbiguous) {
		log.Print("the order may have been placed: reconcile")
	}
}
