"""Five passages shared by the retrieval tests: one fact each, with names a model cannot know."""

from prover.retrieval import Passage

CORPUS = [
    Passage("d0", "Velmora", "Velmora is a port city in Dravia, famous for its lighthouse."),
    Passage("d1", "Orsk Textiles", "Orsk Textiles is a company founded in 1931 by Ilsa Korven."),
    Passage("d2", "Ilsa Korven", "Ilsa Korven was born in Velmora and became an engineer."),
    Passage("d3", "The Amber Tide", "The Amber Tide is a 1977 drama directed by Tomas Reyl."),
    Passage("d4", "Dravia", "Dravia is a sovereign state whose capital is Halvik."),
]
