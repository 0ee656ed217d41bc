"""How a written file is defined, one machinery for all of them: a record (run.json, a line of
metrics.jsonl: records/definitions.py) or a table (a CSV the analysis or the planner writes, one row
per cell, epoch, round, ...: records/tables.py) is a `Record` of `Field`s, each with its name, type,
unit, meaning and when it may be empty (and what says why), in the order the file holds them.

The writers' records are checked against their definition by the unit tests (the builders run,
their keys compared); the analysis reads every record through `Record.read`, so a field renamed
on either side fails there instead of turning into NaN in runs.csv. A table's writer builds its
rows to the definition's names (`Record.row`, `Record.undefined`), its header is the definition's
(`Record.header_problem` names the columns a written file has otherwise), and its readers take the
names and the text columns from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# A field's type as the record holds it (JSON), and the Python types a value of it may have; a
# table's column holds one of SCALAR
TYPES = {
    "float": (int, float),
    "int": (int,),
    "str": (str,),
    "bool": (bool,),
    "list": (list,),
    "object": (dict,),
    "any": (object,),
}
SCALAR = ("float", "int", "bool", "str")


@dataclass(frozen=True)
class Field:
    """One field of a record, or one column of a table. `empty`: when it may be None (empty in a
    table) and what says why (a reason field's name or the rule), '' where a written record always
    holds a value; `absent`: where today's writers leave it out of the record altogether, and why (''
    where every record of today holds it; a test fails on a writer that drops any other); `old`: only
    records written by earlier versions hold it (the analysis reads it for them); `part`: the nested
    record it holds (or a list of). `was`: the name earlier versions wrote it under, and `old_words`:
    (earlier word, today's) pairs of its values; Record.today reads both as today's (records.read_run,
    the compatibility reader). A table's column only: `text`, read back as written, never as a number
    ('0' is an id); `copied`, the field of the same name of what the table is made from, as it is (the
    cell's run.json for runs.csv, its epoch record for epochs.csv, submitted.csv for cost.csv)."""

    name: str
    type: str
    unit: str
    meaning: str
    empty: str = ""
    old: bool = False
    part: Record | None = None
    absent: str = ""
    was: str = ""
    old_words: tuple[tuple[str, str], ...] = ()
    text: bool = False
    copied: bool = False

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"field {self.name}: type {self.type!r} is not one of {sorted(TYPES)}")


@dataclass(frozen=True)
class Record:
    """A record's or a table's definition: its fields in the order the docs list them (a table's:
    the order of its columns). `open`: it may hold names it does not list (a backend's own options in
    training, the config's settings; a table's columns after its own: provenance.csv's differing
    training settings)."""

    name: str
    where: str
    meaning: str
    fields: tuple[Field, ...]
    open: bool = False
    by_name: dict[str, Field] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        doubled = sorted({name for name in names if names.count(name) > 1})
        if doubled:
            raise ValueError(f"record {self.name} defines {doubled} twice")
        object.__setattr__(self, "by_name", {f.name: f for f in self.fields})

    @property
    def names(self) -> list[str]:
        return list(self.by_name)

    def written(self) -> tuple[str, ...]:
        """The names today's writers write (not the old ones)."""
        return tuple(f.name for f in self.fields if not f.old)

    def always_written(self) -> tuple[str, ...]:
        """The names every record today's writers write holds (not the old ones, nor those `absent`
        says a writer may leave out)."""
        return tuple(f.name for f in self.fields if not f.old and not f.absent)

    def of_type(self, kind: str) -> list[str]:
        return [f.name for f in self.fields if f.type == kind]

    def text(self) -> dict[str, type]:
        """The dtypes that read a table's text columns back as written (pandas.read_csv's `dtype`)."""
        return {f.name: str for f in self.fields if f.text}

    def copied(self) -> list[str]:
        return [f.name for f in self.fields if f.copied]

    def row(self, values: dict, derived: tuple[str, ...] = ()) -> dict:
        """`values` as a row of this table: it must hold every column but `derived` (those the frame
        computes), and no other, so that a column renamed on one side fails here, not as NaN."""
        missing = [name for name in self.names if name not in values and name not in derived]
        extra = [name for name in values if name not in self.by_name]
        if missing or extra:
            raise KeyError(f"{self.name} row: lacks {missing}, not defined {extra} ({self.defined_in()})")
        return values

    def header_problem(self, header: list[str]) -> str:
        """Why a written table's header is not its definition's columns in order ('' where it is),
        naming the columns: those it lacks, those it holds beyond them (an open table may hold more
        after its own), and a changed order."""
        own = header[: len(self.names)] if self.open else header
        missing = [name for name in self.names if name not in own]
        extra = [name for name in own if name not in self.by_name]
        if missing or extra:
            return f"{self.where}: lacks {missing}, not defined {extra} ({self.defined_in()})"
        if own != self.names:
            moved = [name for name, defined in zip(own, self.names, strict=True) if name != defined]
            return f"{self.where}: columns {moved} out of the defined order ({self.defined_in()})"
        return ""

    def defined_in(self) -> str:
        """Where the definition is, for the messages."""
        return "records/tables.py" if self.where.endswith(".csv") else "records/definitions.py"

    def undefined(self, record: Mapping) -> list[str]:
        """The names in a written record (its nested parts too, dotted) its definition does not hold."""
        found = [] if self.open else sorted(str(key) for key in record if key not in self.by_name)
        for name, value in record.items():
            known = self.by_name.get(name)
            if known is not None and known.part is not None:
                parts = value if isinstance(value, list) else [value]
                for part in parts:
                    if isinstance(part, Mapping):
                        found += [f"{name}.{inner}" for inner in known.part.undefined(part)]
        return sorted(set(found))

    def read(self, record: Mapping | None) -> ReadRecord:
        """The record for reading: a name its definition lacks raises UndefinedField."""
        return ReadRecord(self, record or {})

    def today(self, record: Mapping) -> dict:
        """A written record in today's names and words, its nested parts too: a field an earlier
        version wrote under another name (`was`) under its own, and an earlier word of its value
        (`old_words`) as today's. A record that holds both names keeps today's."""
        found = dict(record)
        for known in self.fields:
            if known.was and known.was in found:
                value = found.pop(known.was)
                found.setdefault(known.name, value)
            if known.name not in found:
                continue
            value = found[known.name]
            words = dict(known.old_words)
            if isinstance(value, str) and value in words:
                found[known.name] = words[value]
            elif known.part is not None and isinstance(value, Mapping):
                found[known.name] = known.part.today(value)
            elif known.part is not None and isinstance(value, list):
                found[known.name] = [known.part.today(item) if isinstance(item, Mapping) else item for item in value]
        return found


class UndefinedField(KeyError):
    """The analysis asked a record for a name its definition does not hold."""


class ReadRecord(dict):
    """A record as the analysis reads it: get, [] and `in` accept only defined names (any name in an
    open record), and a field holding a nested record reads as that record."""

    def __init__(self, definition: Record, values: Mapping):
        super().__init__(values)
        self.definition = definition

    def _field(self, name: object) -> Field | None:
        known = self.definition.by_name.get(name)  # type: ignore[arg-type]
        if known is None and not self.definition.open:
            raise UndefinedField(
                f"{self.definition.name} record has no field {name!r} ({self.definition.defined_in()} defines its fields)"
            )
        return known

    def _nested(self, known: Field | None, value: object) -> object:
        if known is None or known.part is None:
            return value
        if isinstance(value, Mapping):
            return known.part.read(value)
        if isinstance(value, list):  # a list of nested records (an epoch's ranks)
            return [known.part.read(item) if isinstance(item, Mapping) else item for item in value]
        return value

    def __getitem__(self, name: object) -> object:
        known = self._field(name)
        return self._nested(known, super().__getitem__(name))

    def get(self, name: object, default: object = None) -> object:
        known = self._field(name)
        return self._nested(known, super().get(name, default))

    def __contains__(self, name: object) -> bool:
        self._field(name)
        return super().__contains__(name)
