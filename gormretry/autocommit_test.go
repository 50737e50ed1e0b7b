package gormretry_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/sqlretry/sqlretry"
)

// Auto is a row with a serial key: gorm's Create reads it back (RETURNING
// on PostgreSQL, LastInsertId on MariaDB).
type Auto struct {
	ID  int64
	V   int64
	Grp string
}

func (Auto) TableName() string { return "auto" }

// With SkipDefaultTransaction, gorm's Create is an autocommit statement the
// Connector retries, and settles with the verify sqlretry.WithOp attaches:
// under session kills no row is lost, duplicated or misreported, even
// where gorm adds a second error after the Connector's (RETURNING's rows
// closed after a failed read).
func TestAutocommitCreateUnderKills(t *testing.T) {
	for _, e := range engines(t) {
		t.Run(e.name, func(t *testing.T) {
			schema(t, e)
			p := e.policy(t)
			gdb, sdb := openGorm(t, e, p, gorm.Config{SkipDefaultTransaction: true})
			if err := gdb.AutoMigrate(&Auto{}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), chaosDuration()/2) // the module stays under 20 s
			defer cancel()
			var mu sync.Mutex
			var told []outcome
			var wg sync.WaitGroup
			for w := int64(0); w < 2; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for v := w; ctx.Err() == nil; v += 2 {
						cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
						op := sqlretry.Write("create", sqlretry.Exists(sdb, e.q("SELECT 1 FROM auto WHERE v = $1"), v))
						err := gdb.WithContext(sqlretry.WithOp(cctx, op)).Create(&Auto{V: v, Grp: "auto"}).Error
						ccancel()
						mu.Lock()
						told = append(told, outcome{v, err})
						mu.Unlock()
					}
				}()
			}
			kills := killer(ctx, t, e)
			wg.Wait()
			killed := <-kills // the killer has stopped: no kill reaches the Find below
			count := map[int64]int{}
			var rows []Auto
			if err := gdb.Find(&rows).Error; err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				count[r.V]++
			}
			var r result
			for _, o := range told {
				tally(&r, o, count[o.v])
			}
			t.Logf("%s autocommit Create: %v (first failure: %v); %d sessions killed; %+v", e.name, r, r.sample, killed, p.Stats())
			if r.lost+r.duplicated+r.misreported != 0 {
				t.Errorf("%v; want 0 lost, 0 duplicated, 0 misreported", r)
			}
		})
	}
}
