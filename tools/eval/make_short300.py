#!/usr/bin/env python3
"""Writes data/eval/short300.jsonl: project-written short-answer items.

Five kinds, each item asking for one word or one number:
  arithmetic  one-step +, -, x, / on small numbers
  units       one conversion between common units
  facts       general knowledge (capitals, colours, animals, science, time)
  words       opposites, plurals, past tenses
  spelling    letter counts, first/last letters, words spelled backwards

Every item: {"id", "kind", "category", "question", "answer", "aliases"}.
`kind` is "number" or "text"; loadgen's short-answer checker reads it.
Numbers never appear in their own question, so an answer that merely
repeats the question's numbers is not counted as right. Output is the same
for the same --seed (the committed file is --seed 23).

    python3 tools/eval/make_short300.py [--seed 23] [--out data/eval/short300.jsonl] [--check]
"""
import argparse
import json
import random
import re
import sys

SIZE = 300  # items kept, after a seeded shuffle of all that are generated
NUM = "Answer with a number."
WORD = "Answer with one word."

CAPITALS = [
    ("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Germany", "Berlin"),
    ("Spain", "Madrid"), ("England", "London"), ("Russia", "Moscow"), ("China", "Beijing"),
    ("Egypt", "Cairo"), ("Canada", "Ottawa"), ("Greece", "Athens"), ("Portugal", "Lisbon"),
    ("Ireland", "Dublin"), ("Austria", "Vienna"), ("Norway", "Oslo"), ("Sweden", "Stockholm"),
    ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Poland", "Warsaw"),
    ("Hungary", "Budapest"), ("Thailand", "Bangkok"), ("South Korea", "Seoul"),
    ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Argentina", "Buenos Aires"),
    ("Cuba", "Havana"), ("Australia", "Canberra"), ("India", "New Delhi"),
    ("Belgium", "Brussels"), ("the Netherlands", "Amsterdam"), ("Turkey", "Ankara"),
    ("Mexico", "Mexico City"), ("the United States", "Washington"),
    ("Switzerland", "Bern"), ("Czechia", "Prague"),
]

# (question, answer, aliases)
FACTS = [
    ("What colour is the sky on a clear day?", "blue", []),
    ("What colour is grass?", "green", []),
    ("What colour is a ripe banana?", "yellow", []),
    ("What colour is snow?", "white", []),
    ("What colour is coal?", "black", []),
    ("What colour do you get by mixing blue and yellow?", "green", []),
    ("What colour do you get by mixing red and white?", "pink", []),
    ("What colour is a ripe tomato?", "red", []),
    ("What is frozen water called?", "ice", []),
    ("Which planet is known as the Red Planet?", "Mars", []),
    ("What is the largest planet in our solar system?", "Jupiter", []),
    ("Which planet do we live on?", "Earth", []),
    ("What star is at the centre of our solar system?", "Sun", []),
    ("What is the closest natural satellite to Earth?", "Moon", []),
    ("Which gas do humans need to breathe to stay alive?", "oxygen", []),
    ("Which gas do plants take in from the air?", "carbon dioxide", ["co2"]),
    ("What is the chemical symbol for water?", "H2O", []),
    ("What is the chemical symbol for gold?", "Au", []),
    ("What is the hardest natural substance?", "diamond", ["diamonds"]),
    ("What is the largest ocean on Earth?", "Pacific", []),
    ("What is the longest river in Africa?", "Nile", []),
    ("What is the tallest mountain in the world?", "Everest", ["mount everest"]),
    ("What is the largest desert in Africa?", "Sahara", []),
    ("On which continent is Egypt?", "Africa", []),
    ("On which continent is Brazil?", "South America", []),
    ("On which continent is Japan?", "Asia", []),
    ("What language is mainly spoken in France?", "French", []),
    ("What language is mainly spoken in Spain?", "Spanish", []),
    ("What language is mainly spoken in Germany?", "German", []),
    ("What language is mainly spoken in Italy?", "Italian", []),
    ("What language is mainly spoken in Japan?", "Japanese", []),
    ("What language is mainly spoken in Brazil?", "Portuguese", []),
    ("What is the currency of Japan?", "yen", []),
    ("What is the currency of the United Kingdom?", "pound", ["pounds", "pound sterling"]),
    ("Which animal says moo?", "cow", ["cows"]),
    ("Which animal says meow?", "cat", ["cats"]),
    ("Which animal barks?", "dog", ["dogs"]),
    ("Which animal is known as the king of the jungle?", "lion", []),
    ("What is the largest animal on Earth?", "blue whale", ["whale"]),
    ("What is the tallest animal in the world?", "giraffe", []),
    ("Which bird is a symbol of peace?", "dove", []),
    ("Which animal has a trunk?", "elephant", ["elephants"]),
    ("What do bees make?", "honey", []),
    ("What do caterpillars turn into?", "butterflies", ["butterfly", "moths", "moth"]),
    ("What is a baby dog called?", "puppy", ["pup"]),
    ("What is a baby cat called?", "kitten", []),
    ("What is a baby cow called?", "calf", []),
    ("What is a baby sheep called?", "lamb", []),
    ("What is the young of a frog called?", "tadpole", []),
    ("Which organ pumps blood through the body?", "heart", []),
    ("Which organ do we use to think?", "brain", []),
    ("Which organ do we use to breathe?", "lungs", ["lung"]),
    ("Which sense do we use our ears for?", "hearing", []),
    ("Which sense do we use our nose for?", "smell", ["smelling"]),
    ("Which season comes after winter?", "spring", []),
    ("Which season comes after summer?", "autumn", ["fall"]),
    ("Which season is the coldest?", "winter", []),
    ("Which day comes after Monday?", "Tuesday", []),
    ("Which day comes after Friday?", "Saturday", []),
    ("Which day comes before Sunday?", "Saturday", []),
    ("Which month comes after January?", "February", []),
    ("Which month comes after June?", "July", []),
    ("Which month comes before December?", "November", []),
    ("What is the first month of the year?", "January", []),
    ("What is the last month of the year?", "December", []),
    ("Who wrote Romeo and Juliet?", "Shakespeare", ["william shakespeare"]),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci", ["da vinci", "leonardo"]),
    ("Who developed the theory of relativity?", "Einstein", ["albert einstein"]),
    ("What do we call a shape with three sides?", "triangle", []),
    ("What do we call a shape with four equal sides?", "square", []),
    ("What do we call a shape with eight sides?", "octagon", []),
    ("What is the opposite of north?", "south", []),
    ("What is the opposite of east?", "west", []),
    ("What metal is liquid at room temperature?", "mercury", []),
    ("What do we call a person who treats sick people?", "doctor", ["physician"]),
    ("What do we call a person who teaches at a school?", "teacher", []),
    ("What do we call a person who flies a plane?", "pilot", []),
    ("What is the main ingredient of bread?", "flour", ["wheat"]),
    ("What fruit is used to make wine?", "grapes", ["grape"]),
    ("What fruit do apple pies contain?", "apples", ["apple"]),
    ("What is the boiling point of water in degrees Celsius?", "100", []),
    ("What is the freezing point of water in degrees Celsius?", "0", []),
]

# (question, number) facts that are counts.
COUNT_FACTS = [
    ("How many days are in a week?", 7), ("How many months are in a year?", 12),
    ("How many legs does a spider have?", 8), ("How many legs does a dog have?", 4),
    ("How many legs does an insect have?", 6), ("How many wheels does a bicycle have?", 2),
    ("How many sides does a triangle have?", 3), ("How many sides does a hexagon have?", 6),
    ("How many sides does a square have?", 4), ("How many continents are there?", 7),
    ("How many hours are in a day?", 24), ("How many minutes are in an hour?", 60),
    ("How many seconds are in a minute?", 60), ("How many days are in a leap year?", 366),
    ("How many planets are in our solar system?", 8), ("How many letters are in the English alphabet?", 26),
    ("How many players are on a soccer team on the field?", 11), ("How many strings does a standard guitar have?", 6),
    ("How many days are in a normal year?", 365), ("How many weeks are in a year?", 52),
]

OPPOSITES = [
    ("hot", "cold"), ("up", "down"), ("big", "small"), ("fast", "slow"), ("happy", "sad"),
    ("light", "dark"), ("open", "closed"), ("old", "young"), ("full", "empty"), ("wet", "dry"),
    ("hard", "soft"), ("early", "late"), ("rich", "poor"), ("tall", "short"), ("strong", "weak"),
    ("heavy", "light"), ("day", "night"), ("win", "lose"), ("love", "hate"), ("left", "right"),
    ("true", "false"), ("first", "last"), ("inside", "outside"), ("begin", "end"),
]
OPPOSITE_ALIASES = {"big": ["little", "tiny"], "open": ["shut"], "old": ["new"], "begin": ["finish", "stop"],
                    "first": ["final"], "hard": ["easy"], "light": ["heavy"]}
PLURALS = [
    ("mouse", "mice"), ("child", "children"), ("foot", "feet"), ("tooth", "teeth"), ("man", "men"),
    ("woman", "women"), ("goose", "geese"), ("person", "people"), ("box", "boxes"), ("city", "cities"),
    ("leaf", "leaves"), ("knife", "knives"), ("wolf", "wolves"), ("baby", "babies"), ("bus", "buses"),
]
PAST = [
    ("go", "went"), ("eat", "ate"), ("see", "saw"), ("run", "ran"), ("write", "wrote"),
    ("swim", "swam"), ("sing", "sang"), ("take", "took"), ("give", "gave"), ("buy", "bought"),
    ("think", "thought"), ("drink", "drank"), ("fly", "flew"), ("speak", "spoke"), ("make", "made"),
]
SPELL_WORDS = [
    "river", "stone", "garden", "quiet", "number", "city", "paper", "window", "green", "music",
    "bridge", "winter", "table", "story", "market", "cloud", "letter", "forest", "summer", "train",
    "simple", "orange", "morning", "school", "mountain", "silver", "road", "friend", "ocean", "house",
    "banana", "pencil", "yellow", "kitchen", "dog", "cat", "sun", "tree", "book", "fish",
]
UNITS = [  # (from, to, factor, low, high)
    ("meters", "centimeters", 100, 2, 9), ("kilometers", "meters", 1000, 2, 9),
    ("hours", "minutes", 60, 2, 9), ("minutes", "seconds", 60, 2, 9), ("days", "hours", 24, 2, 6),
    ("weeks", "days", 7, 2, 9), ("feet", "inches", 12, 2, 9), ("kilograms", "grams", 1000, 2, 9),
    ("liters", "milliliters", 1000, 2, 9), ("years", "months", 12, 2, 9), ("dozens", "items", 12, 2, 9),
    ("centimeters", "millimeters", 10, 2, 9),
]
UNIT_ONE = {"meters": "meter", "kilometers": "kilometer", "hours": "hour", "minutes": "minute",
            "days": "day", "weeks": "week", "feet": "foot", "kilograms": "kilogram", "liters": "liter",
            "years": "year", "dozens": "dozen", "centimeters": "centimeter"}


def numbers_in(text):
    return set(re.findall(r"\d+", text))


def item(kind, category, question, answer, aliases=()):
    return {"kind": kind, "category": category, "question": question,
            "answer": str(answer), "aliases": [a for a in aliases]}


def arithmetic(rng, count):
    out, seen = [], set()
    while len(out) < count:
        op = ["+", "-", "x", "/"][len(out) % 4]
        if op == "+":
            a, b = rng.randint(2, 20), rng.randint(2, 20)
            q, ans = f"What is {a} + {b}?", a + b
        elif op == "-":
            a = rng.randint(10, 30)
            b = rng.randint(2, a - 2)
            q, ans = f"What is {a} - {b}?", a - b
        elif op == "x":
            a, b = rng.randint(2, 9), rng.randint(2, 9)
            q, ans = f"What is {a} times {b}?", a * b
        else:
            b, ans = rng.randint(2, 9), rng.randint(2, 9)
            q = f"What is {b * ans} divided by {b}?"
        if q in seen or str(ans) in numbers_in(q):
            continue
        seen.add(q)
        out.append(item("number", "arithmetic", f"{q} {NUM}", ans))
    return out


def units(rng, count):
    out, seen = [], set()
    while len(out) < count:
        frm, to, factor, lo, hi = UNITS[len(out) % len(UNITS)]
        n = rng.randint(lo, hi)
        q = f"How many {to} are in {n} {frm}?"
        ans = n * factor
        if q in seen or str(ans) in numbers_in(q):
            continue
        seen.add(q)
        out.append(item("number", "units", f"{q} {NUM}", ans))
    return out


def facts():
    out = [item("text", "capitals", f"What is the capital of {c}? {WORD}", city)
           for c, city in CAPITALS]
    for q, a, al in FACTS:
        kind = "number" if a.isdigit() else "text"
        out.append(item(kind, "facts", f"{q} {NUM if kind == 'number' else WORD}", a, al))
    out += [item("number", "counts", f"{q} {NUM}", n) for q, n in COUNT_FACTS]
    return out


def words():
    out = [item("text", "opposites", f"What is the opposite of '{w}'? {WORD}", o,
                OPPOSITE_ALIASES.get(w, [])) for w, o in OPPOSITES]
    out += [item("text", "plurals", f"What is the plural of '{w}'? {WORD}", p) for w, p in PLURALS]
    out += [item("text", "past tense", f"What is the past tense of '{w}'? {WORD}", p) for w, p in PAST]
    return out


def spelling(rng):
    out = []
    for i, w in enumerate(SPELL_WORDS):
        out.append(item("number", "letter count", f"How many letters are in the word '{w}'? {NUM}", len(w)))
        if w[0] != "a" and i % 2 == 0:
            out.append(item("text", "first letter",
                            f"What is the first letter of the word '{w}'? Answer with one letter.", w[0]))
        elif w[-1] != "a":
            out.append(item("text", "last letter",
                            f"What is the last letter of the word '{w}'? Answer with one letter.", w[-1]))
        if len(w) <= 4:
            out.append(item("text", "backwards",
                            f"Spell the word '{w}' backwards. Answer with one word.", w[::-1]))
    return out


def build(seed):
    rng = random.Random(seed)
    items = arithmetic(rng, 80) + units(rng, 48) + facts() + words() + spelling(rng)
    rng.shuffle(items)
    items = items[:SIZE]
    for i, it in enumerate(items):
        it["id"] = f"tr-short-{i + 1:03d}"
    return [{"id": it.pop("id"), **it} for it in items]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--out", default="data/eval/short300.jsonl")
    ap.add_argument("--check", action="store_true", help="fail if --out differs from what --seed makes")
    args = ap.parse_args()
    text = "".join(json.dumps(it, ensure_ascii=False) + "\n" for it in build(args.seed))
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit(f"{args.out} differs from make_short300.py --seed {args.seed}")
        return
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"{args.out}: {text.count(chr(10))} items")


if __name__ == "__main__":
    main()
