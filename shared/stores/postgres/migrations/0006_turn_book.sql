-- The turn book (shared/owners/turns.py): the whole book in one row, as the
-- JSON of `shared.owners.book.TurnState`. Each step locks the row, applies
-- itself on the database's clock and writes the row back, in one
-- transaction (shared/stores/postgres/turns.py).

CREATE TABLE turn_book (
    id    boolean PRIMARY KEY DEFAULT true CHECK (id),  -- the only row
    state jsonb NOT NULL
);
INSERT INTO turn_book VALUES (true, '{}');
